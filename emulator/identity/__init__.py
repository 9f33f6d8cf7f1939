"""The identity provider's domain: agent registrations, claims, tokens and ID-JAGs, the service side's agents API, the
registration events and their webhooks, service keys and the signing keys. Below the hosted platform (which reads a
registration's trial through it) and above core; no web framework here."""
