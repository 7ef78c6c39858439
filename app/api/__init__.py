"""HTTP layer: one router per resource under routes/, shared dependencies in deps.py."""
