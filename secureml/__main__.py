"""`python -m secureml`: the command line."""

from secureml.cli.program import main

main()
