"""`secureml compile`: the decorator, the compile-time rules, the compiler and its report."""
