"""The context engine: the window that fits an exact budget, built before every model call.

`orchestrator` builds it: `collector` asks every source (`sources`) at once, `compactor` fits
their blocks into the `budget`, `render` lays them out for prompt caches and `report` says
what went in and why; `recipe` is the one recipe an agent's, a proxy's and a session's windows
are built by. `packing` and `excerpt` are the pure cutting functions underneath, and
`assembler` the simpler prompt assembler of named components.
"""
