"""Grade ML coding-interview notebooks with hidden, progressive test suites."""

import warnings

# torch warns on import when NumPy is absent; the grader never needs NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

__version__ = "0.1.0"
