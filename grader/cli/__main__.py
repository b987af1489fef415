"""`python -m grader.cli`: the `grade` command."""

from grader.cli import main

main()
