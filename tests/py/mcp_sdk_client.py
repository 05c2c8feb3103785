#!/usr/bin/env python3
"""Drive `fleetd mcp` with the official MCP Python SDK (PyPI `mcp`, pinned in .ci/run).

    python mcp_sdk_client.py --era 2025-11-25|2026-07-28|auto -- /path/to/fleetd mcp

Connects in the chosen protocol era (2025-11-25: `initialize`; 2026-07-28: `server/discover`;
auto: what `mcp.Client` does by default), lists the tools, calls fleet_whoami, and prints one
JSON line: {"era", "protocol", "tools", "whoami", "ok"}; on any failure the exact error (a
pydantic validation error names every field) and exit status 1. The server gets every
FLEETD_* variable of this process.
"""

import argparse
import json
import os
import sys

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def handshake(session: ClientSession, era: str) -> None:
    if era == "2025-11-25":
        await session.initialize()
    elif era == "2026-07-28":
        await session.discover()
    else:
        from mcp.client._probe import negotiate_auto

        await negotiate_auto(session)


async def main(era: str, cmd: list[str]) -> int:
    env = {k: v for k, v in os.environ.items() if k.startswith("FLEETD_")}
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=env)
    async with stdio_client(params, errlog=sys.stderr) as (read, write):
        async with ClientSession(read, write) as session:
            await handshake(session, era)
            tools = await session.list_tools()
            res = await session.call_tool("fleet_whoami", {})
            text = "".join(c.text for c in res.content if getattr(c, "text", None))
            print(
                json.dumps(
                    {
                        "era": era,
                        "protocol": str(session.protocol_version),
                        "tools": sorted(t.name for t in tools.tools),
                        "whoami": text,
                        "ok": not res.is_error,
                    }
                )
            )
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--era", required=True, choices=["2025-11-25", "2026-07-28", "auto"])
    p.add_argument("cmd", nargs="+")
    a = p.parse_args()
    try:
        rc = anyio.run(main, a.era, a.cmd)
    except Exception as e:  # the exact failure is the point of this client
        print(f"FAILED in era {a.era}: {type(e).__name__}: {e}", file=sys.stderr)
        rc = 1
    sys.exit(rc)
