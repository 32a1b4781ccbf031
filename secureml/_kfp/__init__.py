"""Everything that touches kfp's internals; nothing else in secureml names a private kfp name."""
