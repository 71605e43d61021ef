"""Webhooks on terminal run states: signed with HMAC-SHA256 over ``<timestamp>.<body>``,
delivered by the ``webhooks.deliver`` task with exponential backoff, every attempt recorded."""
