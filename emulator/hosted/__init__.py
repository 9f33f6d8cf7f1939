"""The hosted platform's domain: organizations, keys, secrets, databases, services, receipts and logs,
their plan limits and lifecycle rules, trials, the authenticator and the reconciler.

Nothing here knows a web framework: the control plane, the site, the admin API, the tunnel and the
gateway call in with typed arguments and get typed records or an `ApiError` back. Each table of the
platform is written from exactly one module of this package.
"""
