"""What every stage runs on: the work-queue reconcile runtime (`workqueue`), Kubernetes
Events (`events`), Prometheus metrics (`metrics`) and the failpoints e2e tests crash the
process at (`failpoint`).
"""
