"""`elastic-ctl`: the operator's CLI (`cli`) and the views that fold or price what it prints
(`views`). `python -m master.ctl` runs it too."""
from .cli import main

__all__ = ["main"]
