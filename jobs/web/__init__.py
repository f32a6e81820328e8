"""Everything the web processes serve: REST (api), pages, /health and SSE (views), websockets (consumers, routing),
/mcp over Streamable HTTP (mcp_http, which mounts jobs.mcp's server), who is calling (auth), the busy-database and
JSON error shapes (middleware), what wakes an open stream (watching) and Daphne's serving (webserver). A thin layer
over jobs.actions; it never imports the supervisor.
"""
