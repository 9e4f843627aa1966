"""The packed statistics row shared by the torch and Triton statistics paths: how many samples, how many fields."""

SAMPLE = 64
FIELDS = 4  # min, max, sum, norm
