"""Character minds: what each character perceived and believes, and where it believes things are."""
