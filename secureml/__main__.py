from secureml.cli.program import main

main()
