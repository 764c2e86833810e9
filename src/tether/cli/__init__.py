"""tether's command-line interface."""
