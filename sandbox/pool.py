def python_plan(command, python):
    return None
