"""Batch studies over model sizes, GPU counts and GPU kinds; also ships example run specs."""
