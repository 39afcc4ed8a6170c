"""An MCP client built on the official Python SDK, for the shared-state
tests: over Streamable HTTP it opens a 2025-11-25 session (initialize),
lists the tools, loads SKILL, lists them again, calls TOOL with ARGS_JSON
CALLS times, and prints JSON: the session id, the tool names before and
after loading, and each call's error flag and text.

usage: session_client.py URL SKILL TOOL ARGS_JSON CALLS
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


def text_of(result) -> str:
    return "\n".join(
        block.text for block in result.content if getattr(block, "type", "") == "text"
    )


async def main() -> None:
    url, skill, tool, arguments, calls = sys.argv[1:]
    async with streamable_http_client(url) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            initialized = await session.initialize()
            before = [t.name for t in (await session.list_tools()).tools]
            loaded = await session.call_tool("load_skill", {"name": skill})
            after = [t.name for t in (await session.list_tools()).tools]
            results = []
            for _ in range(int(calls)):
                result = await session.call_tool(tool, json.loads(arguments))
                results.append({"is_error": bool(result.is_error), "text": text_of(result)})
    print(
        json.dumps(
            {
                "protocol": initialized.protocol_version,
                "loaded": not loaded.is_error,
                "before": before,
                "after": after,
                "calls": results,
            }
        )
    )


asyncio.run(main())
