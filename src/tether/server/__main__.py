"""``python -m tether.server``: the service, started as ``tether serve`` starts it (``tether.server.launch``)."""

from tether.server.launch import main

if __name__ == "__main__":
    main()
