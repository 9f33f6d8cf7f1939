"""The database tunnel: a local TLS endpoint (and HTTP CONNECT proxy) that the real client reaches as
`<org>-<db>.<domain>`, authenticated with PXT/1.0 and relayed to the database's server (server.py, ca.py,
tlsfiles.py);
the same proxy relays every other host under the egress policy (forward.py, egress.py).

Nothing is imported here: the settings read egress.py on every command, which must not pay for TLS.
"""
