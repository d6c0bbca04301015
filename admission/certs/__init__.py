"""The webhook's serving certificate when fitgate manages it itself
(`certificates.mode: self-managed`): see `keeper`.
"""
