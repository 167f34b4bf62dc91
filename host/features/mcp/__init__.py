"""The team's tool servers (MCP) as a capability: config, connections, tools and nodes."""
