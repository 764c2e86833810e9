"""``python -m tickets_app``: serve the service; ``... seed`` writes the demo data, ``... index`` the KB index."""

from tickets_app.launch import main

if __name__ == "__main__":
    main()
