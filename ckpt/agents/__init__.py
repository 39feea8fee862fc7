"""Where agents meet ckpt: the hook adapters (`hooks.py`) and the MCP server (`mcp_server.py`).

A layer above `ckpt.checkpoints` and below `ckpt.cli`: it uses only the public API of
`ckpt.checkpoints` and never imports the CLI (the CLI passes in what it needs, such as its
error table). Nothing is imported here, so `import ckpt.agents.hooks` stays light; the MCP
server needs the optional `mcp` package (`pip install 'ckpt[mcp]'`), imported only by
`mcp_server.py`.
"""
