"""Pod release: a Ready gang's pods are given their nodes and ungated in fitcore's order
(`reconciler`; see docs/ordering.md).
"""
