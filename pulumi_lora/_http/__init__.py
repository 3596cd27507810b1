"""HTTP plumbing shared by the clients: one send per request, and when to send again."""
