"""The AdmissionCheck controllers: the Workload reconciler and the AdmissionCheck `Active`
reconciler (`admissioncheck`)."""
