"""Maintainer tools, off the grading path: they call the grader, nothing in it calls them.

build       grade build [--check]: scaffolds, the catalog index, stale hints
hints       grade hints: grade each exercise's corpus and record its failure patterns
new         grade new EXERCISE: a skeleton exercise
gradescope  grade gradescope EXERCISE: the autograder zip
"""
