"""`python -m master.ctl`: the same as `elastic-ctl`."""
from .cli import main

main()
