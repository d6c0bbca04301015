"""The admission webhook server: TLS on aiohttp (`server`), the framework-independent
review of each AdmissionReview (`review`), the typed payloads (`models`), the decision
process that keeps the webhook's answers within its deadline (`decider`), and the
`fitgate serve` component that runs it with the gate controller (`component`).
"""
