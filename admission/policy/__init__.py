"""FitPolicy: who may use which nodes and NodeShapes (`fitpolicy`, a pure reading of the
objects), and the controller that writes each FitPolicy's Valid condition (`status`).
"""
