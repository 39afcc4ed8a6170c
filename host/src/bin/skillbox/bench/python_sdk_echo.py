"""An MCP server on the official Python SDK with one tool, `noop`, which
returns 42: the unsandboxed baseline `skillbox bench` puts beside its own
stdio round trip. It takes the SDK's 2.x name for the server class and
falls back to 1.x's."""

try:
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:
    from mcp.server.fastmcp import FastMCP as Server

server = Server("bench-peer")


@server.tool()
def noop() -> int:
    """Returns 42. Use to measure calls."""
    return 42


server.run()
