"""The pre-quota gate: the names and pure predicates of the admission gate, the job kinds
Kueue manages and the queues that use fitgate's check (`predicates`, shared with the
webhook and `fitgate explain`), and the controller that removes fitgate's gate from a job
whose gang can fit (`reconciler`).
"""
