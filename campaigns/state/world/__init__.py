"""The world: places, exits and doors, items and who holds them, who knows what, lore, and the world author."""
