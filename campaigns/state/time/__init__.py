"""Story time and world rules: the clock, the calendar, agendas, variables, dice, triggers and their rulebook."""
