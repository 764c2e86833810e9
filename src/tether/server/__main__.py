"""``python -m tether.server``: the same as ``tether serve``."""

from tether.cli.serve import serve

if __name__ == "__main__":
    serve(prog_name="python -m tether.server")
