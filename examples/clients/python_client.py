"""The official Python SDK (`pip install mcp`, 2.x) against the demo server, on the handshake era
(a session): a per-session counter, a state handle, and a question the user answers.

Run it: python3 examples/clients/python_client.py http://127.0.0.1:3000/mcp
"""
import asyncio
import sys

from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client


async def answer(context, params: types.ElicitRequestParams) -> types.ElicitResult:
    # The user's answer to the server's question (a real client asks its user).
    return types.ElicitResult(action="accept", content={"name": "Ada"})


def text(result: types.CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def main(url: str) -> None:
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write, elicitation_callback=answer) as session:
            await session.initialize()
            print("counter:", text(await session.call_tool("counter_add", {"by": 2})))
            created = await session.call_tool("basket_create", {})
            basket = created.structured_content["basket"]
            await session.call_tool("basket_add", {"basket": basket, "item": "pear"})
            print("basket:", text(await session.call_tool("basket_get", {"basket": basket})))
            print("greeting:", text(await session.call_tool("ask_name", {})))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:3000/mcp"))
