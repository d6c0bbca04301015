"""The one adapter between admission and fitcore: the live inventory kept current from the
watch caches (`inventory`), the decisions the stages ask of it (`fitting`), and the gang of
a Workload with Kueue's assignment (`gangs`).
"""
