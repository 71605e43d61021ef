"""OCI registry client: image reference parsing and tag-to-digest resolution."""
