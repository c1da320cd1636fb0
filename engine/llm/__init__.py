"""The engine's side of the chat model: an OpenAI-compatible streaming client (llama.cpp's
`/v1/chat/completions`) and the prompt it is sent, one module per job:

* `prompt`: the prompt within the context budget (system, history that fits, memories, question);
* `client`: `LLMClient`, the async client that streams a chat completion;
* `stream`: reading one streamed completion into `ChatChunk`s (`RecitationCut` ends a recitation);
* `answer`: one answer with the repetition guard watching (`stream_answer`) and its tokens;
* `sampling`: the sampling parameters sent with each request (`GenerationSettings`);
* `tokens`: token counts of the served model (`ServerTokenCounter`);
* `transport`: the kept-alive connections both clients pool, sent once more when closed under them;
* `errors`: the `LLMError` family, every failure a message fit to show a user.

The server's key and which of llama.cpp's endpoints a server has are `engine.llm_access`'s.
"""
