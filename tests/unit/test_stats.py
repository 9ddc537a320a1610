

def test_the_medians_distribution_free_interval_is_the_textbook_order_statistics():
    from harness.ground.stats import median_interval

    # n = 10: x(2) and x(9) (P(X <= 1) = 11/1024 <= 2.5% < P(X <= 2) = 56/1024); n = 6: the extremes (1/64);
    # n = 5: none reaches 95% (1/32 > 2.5%); n = 50: x(18) and x(33)
    assert median_interval([float(v) for v in range(10, 0, -1)]) == {"estimate": 5.5, "lo": 2.0, "hi": 9.0, "n": 10}
    assert median_interval([1, 2, 3, 4, 5, 6])[("lo")] == 1 and median_interval([1, 2, 3, 4, 5, 6])["hi"] == 6
    assert median_interval([1, 2, 3, 4, 5])["lo"] is None
    got = median_interval(list(range(1, 51)))
    assert (got["lo"], got["hi"]) == (18, 33)
