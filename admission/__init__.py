"""admission: the Kueue admission-check service around fitcore."""
