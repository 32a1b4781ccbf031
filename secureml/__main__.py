from secureml.cli import app

app()
