"""The bundled exercises: one folder each, with a suite.py defining `exercise`."""
