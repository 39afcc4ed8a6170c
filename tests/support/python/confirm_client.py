"""An MCP client built on the official Python SDK, for the end-to-end
tests: it starts `skillbox serve` over stdio, calls one tool, answers any
confirmation question with ANSWER (accept or decline), and prints JSON:
the questions it was asked, the result's text, and whether it is an error.

usage: confirm_client.py ANSWER TOOL ARGS_JSON SKILLBOX [SERVE_ARG ...]
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


async def main() -> None:
    answer, tool, arguments, command, *serve = sys.argv[1:]
    asked: list[str] = []

    async def on_question(context, params):
        asked.append(params.message)
        if answer == "accept":
            return types.ElicitResult(action="accept", content={"approve": True})
        return types.ElicitResult(action="decline")

    server = StdioServerParameters(
        command=command, args=["serve", *serve], env=dict(os.environ)
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, elicitation_callback=on_question) as session:
            await session.initialize()
            result = await session.call_tool(tool, json.loads(arguments))
            text = "\n".join(
                block.text for block in result.content if getattr(block, "type", "") == "text"
            )
            print(json.dumps({"asked": asked, "text": text, "is_error": bool(result.is_error)}))


asyncio.run(main())
