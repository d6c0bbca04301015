"""The only package of fitgate that talks to the Kubernetes API (kubernetes_asyncio).

Everything else in `admission/` depends on the small surface defined here, never on the
client library:

- `kinds`: the `Kind` registry (group, version, plural, namespaced) of every object fitgate
  reads or writes, so code names kinds, not URLs.
- `client.Client`: the thin async wrapper (get, list, watch, create, patch, apply_status,
  delete, event). `client.ApiClient` implements it over kubernetes_asyncio; tests use the
  project's own fake, `fake.FakeClient`, which keeps objects in memory with
  resourceVersions and watch events (never a fake of someone else's HTTP layer).
- `errors`: `NotFound`, `Conflict`, `AlreadyExists`, `Gone`, `ApiError` raised by every
  implementation alike.
- `cache`: watch-backed stores (list-then-watch from a resourceVersion, resume after 410
  Gone and outages) that call subscribers with `Event`s.
- `lease`: leader election on a coordination.k8s.io/v1 Lease.

Objects are plain dicts, exactly as the API serves them (the same dicts `fitcore` parses).
"""
