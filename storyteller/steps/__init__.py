"""The post-turn steps: what runs after a reply is committed, one step at a time, and the scheduler that runs them."""
