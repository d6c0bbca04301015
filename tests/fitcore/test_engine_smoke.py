from tests.fitcore import builders as b


def test_two_gpus_one_root(fit):
    r = fit(slices=[b.rslice("s", b.gpus(4, roots=2))],
            claims=[b.claim("c", b.req("g", count=2), match="gpu.example.com/pcieRoot")])
    assert r.fits, r
