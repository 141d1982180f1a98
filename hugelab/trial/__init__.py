"""One native trial: start and contain its process tree, sample it, judge its evidence."""
