"""The offline kind cluster: node image from Go modules and Debian packages (see README)."""
