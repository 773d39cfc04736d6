"""`edgeinfer chat`: the conversation (session), slash commands, transcripts, terminal input
and output, and the loops that tie them together (app)."""
