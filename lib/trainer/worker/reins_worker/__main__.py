"""`python -m reins_worker [--host H] [--port P] ...`: runs the worker's HTTP server."""

from .server import main

main()
