"""Example third-party dpreg plugin package (kept under dpreg's tests)."""
