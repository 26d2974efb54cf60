"""`agentfs serve`: the trace API over HTTP and a trace viewer in the browser.

An optional part (`pip install 'agentfs-workspace[serve]'`): FastAPI on uvicorn.
The routes call the same core functions as the commands, under the same
trace locks (`agentfs/server/routes.py`); runs go on threads of the server
and report their events as server-sent events (`agentfs/server/runs.py`,
`agentfs/server/events.py`). Nothing here reads the environment: the command
(`agentfs/cli/serve.py`) passes the model chooser and the token in.
"""
