#!/usr/bin/env python3
"""rlfuse_env: write an rlfuse environment (docs/environments.md) as a small
Python class. The module speaks the protocol: it reads one JSON request per
line on standard input, calls the class, and answers one JSON line on
standard output, flushed. The observation's text is encoded here with the
checkpoint's own tokenizer (tools/tokenizer.py), so a class deals in text.

    import sys, os
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from rlfuse_env import Environment, main

    class Echo(Environment):
        def reset(self, prompt, answer, meta, key):
            return ""                                  # the episode's state
        def step(self, state, text, ids, turn):
            return f"you said {len(ids)} tokens", 0.0, turn >= 3, state

    if __name__ == "__main__":
        main(Echo)

Every environment program takes the same command line:
  tools/py tools/env_X.py --checkpoint CKPT.h5 [--tokenizer-json F] [--chat [--chat-role ROLE]]
plus its own options (Environment.add_arguments). --checkpoint: an rlfuse
checkpoint with a /tokenizer group (tools/gguf_import.py and
tools/hf_import.py write one); --tokenizer-json FILE: encode with the model's
own tokenizer.json instead (as tools/tokenizer.py --tokenizer-json).

The class (subclass Environment):
  reset(prompt, answer, meta, key) -> state
      prompt: the prompt's text (the request's, else its ids decoded);
      answer: the reference answer text or None; meta: the prompt's
      metadata as the request holds it, or None; key: (seed, iteration,
      sample), for an environment that draws at random.
  step(state, text, ids, turn) -> (observation, reward, done, state)
      text and ids: the model's segment `turn` (1, 2, ...); text is the
      request's, else the ids decoded (an id without a token, in a
      vocabulary padded for the model, as nothing). observation: text (None: no
      observation, ids []); reward: a finite number added to the episode's
      reward; done: whether the episode ends; state: the new state (None
      keeps the old one).
States are strings, opaque to rlfuse. A class with json_state = True may
use any JSON value: it is sent as its JSON text and parsed back.
self.args holds the parsed command line, self.tokenizer the
tools/tokenizer.py Tokenizer.

Observation text is encoded with special=False: a special token's text in
it (a program printing "<|im_end|>") stays plain text and cannot end a turn
(observation_special = True in the class makes those texts the tokens, for
text the environment controls).

--chat wraps each observation as the chat template's turn of ROLE (--chat-role,
default tool) followed by the assistant's header, the generation prompt:
the ids are what the template renders at that point of the conversation.
They are found by rendering a conversation [user, assistant] and the same
with the observation's turn appended and the generation prompt: the second
rendering less the first is the observation's turn; before it comes the
rest of the assistant turn's closing text ("<|im_end|>\\n" in ChatML) that
the model's segment did not end with (a segment that stopped on
<|im_end|> leaves "\\n"; one that stopped on "</tool_call>" leaves the
whole). The text is encoded as tools/tokenizer.py encodes a rendered
conversation (special tokens' texts are tokens), except that the
observation's own text stays plain where it holds a special token's text.
A template that renders the conversation differently once a turn follows
(the earlier text not a prefix of the later) is refused at start.

Requests that fail (not JSON, an unknown op, a class that raises) are
answered with one line {"error": "..."}; rlfuse stops the run showing it.
A blank line is skipped without an answer. Whatever the class prints goes
to standard error: standard output carries the protocol only. Errors at
start (no checkpoint, no chat template) are one line "NAME: error: ..." and
exit status 1; end of input ends the program with status 0.
"""
import argparse
import json
import math
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer import Tokenizer, TokenizerError  # noqa: E402

# placeholders rendered into the template to find where a turn's text goes
_USER, _SEGMENT, _OBSERVATION = "RLFUSEUSER7", "RLFUSESEGMENT7", "RLFUSEOBSERVATION7"


class EnvError(Exception):
    """A one-line reason."""


class Environment:
    """Subclass and override reset and step (the module docstring says how)."""
    json_state = False            # True: states are JSON values, sent as their JSON text
    observation_special = False   # True: special tokens' texts in an observation are those tokens

    def __init__(self, args=None):
        self.args = args
        self.tokenizer = None  # set by Server

    @classmethod
    def add_arguments(cls, parser):
        """Add the environment's own options to an argparse parser."""

    def reset(self, prompt, answer, meta, key):
        return ""

    def step(self, state, text, ids, turn):
        raise NotImplementedError("the environment has no step")


def last_tool_call(text, open_tag="<tool_call>", close_tag="</tool_call>"):
    """The text between the last complete OPEN_TAG ... CLOSE_TAG of TEXT, or None."""
    end = text.rfind(close_tag)
    while end >= 0:
        start = text.rfind(open_tag, 0, end)
        if start >= 0:
            return text[start + len(open_tag):end]
        end = text.rfind(close_tag, 0, end)
    return None


def load_tokenizer(checkpoint, tokenizer_json=None):
    """tools/tokenizer.py's Tokenizer of CHECKPOINT's /tokenizer group (encoding with TOKENIZER_JSON when given)."""
    tk = Tokenizer.from_checkpoint(checkpoint)
    if tokenizer_json:
        if not os.path.isfile(tokenizer_json):
            raise TokenizerError(f"--tokenizer-json {tokenizer_json}: no such file")
        tk.tokenizer_json = tokenizer_json
    return tk


class ChatTurns:
    """Wraps an observation as the chat template's ROLE turn plus the generation prompt (module docstring)."""

    def __init__(self, tk, role="tool"):
        self.tk, self.role = tk, role
        conv = [{"role": "user", "content": _USER}, {"role": "assistant", "content": _SEGMENT}]
        try:
            self.before = tk.apply_chat_template(conv, add_generation_prompt=False)
            after = tk.apply_chat_template(conv + [{"role": role, "content": _OBSERVATION}], add_generation_prompt=True)
        except TokenizerError as e:
            raise EnvError(f"--chat: {e}")
        if _SEGMENT not in self.before:
            raise EnvError("--chat: the chat template does not render the assistant's message as it is")
        if not after.startswith(self.before):
            raise EnvError(f"--chat: the chat template renders the conversation differently once a {role} turn follows "
                           "(the earlier rendering is not a prefix of the later one), so a turn cannot be appended")
        turn = after[len(self.before):]
        if turn.count(_OBSERVATION) != 1:
            raise EnvError(f"--chat: the chat template does not render a {role} message's content as it is")
        self.pre, self.post = turn.split(_OBSERVATION)
        self.close = self.before[self.before.index(_SEGMENT) + len(_SEGMENT):]  # "<|im_end|>\n" in ChatML
        self.conv = conv

    def rest_of_close(self, segment_text):
        """The part of the assistant turn's closing text that SEGMENT_TEXT does not already end with."""
        for k in range(len(self.close), 0, -1):
            if segment_text.endswith(self.close[:k]):
                return self.close[k:]
        return self.close

    def wrap(self, segment_text, observation):
        """(the text appended after the model's segment, the observation's text as the template renders it)."""
        turn = self.tk.apply_chat_template(self.conv + [{"role": self.role, "content": observation}], add_generation_prompt=True)
        turn = turn[len(self.before):]
        if not (turn.startswith(self.pre) and turn.endswith(self.post)):
            raise EnvError(f"the chat template renders this {self.role} turn unlike its placeholder's")
        return self.rest_of_close(segment_text), turn[len(self.pre):len(turn) - len(self.post)]


class Server:
    """Answers protocol requests (dicts) with the environment ENV (an Environment)."""

    def __init__(self, env, tk, chat_role=None):
        self.env, self.tk = env, tk
        env.tokenizer = tk
        self.chat = ChatTurns(tk, chat_role) if chat_role else None
        self.special_texts = [tk.token_text(i) for i in tk.special]
        tk.encode("warm up")  # builds the tokenizers.Tokenizer now, not during the first request

    def _has_special(self, text):
        return any(s and s in text for s in self.special_texts)

    def _state_in(self, s):
        if not self.env.json_state or s is None:
            return s
        if not isinstance(s, str):
            raise EnvError(f"state must be a string, got {type(s).__name__}")
        return json.loads(s)

    def _state_out(self, s):
        if self.env.json_state:
            return json.dumps(s, separators=(",", ":"), allow_nan=False)
        if not isinstance(s, str):
            raise EnvError(f"the environment's state must be a string (or set json_state = True), got {type(s).__name__}")
        return s

    def _ids(self, req):
        ids = req.get("ids", [])
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise EnvError('"ids" must be a list of integers')
        return ids  # ids past the tokenizer's (a vocabulary padded for the model) are the model's to make

    def _text(self, req, ids, key):
        t = req.get(key)
        if t is None:  # no text in the request: the ids decoded, those without a token as nothing
            return self.tk.decode([i for i in ids if 0 <= i < len(self.tk.tokens)])
        if not isinstance(t, str):
            raise EnvError(f'"{key}" must be a string or null')
        return t

    def encode_observation(self, segment_text, obs):
        """(ids, text) of observation OBS after the model's segment SEGMENT_TEXT."""
        special = self.env.observation_special
        if self.chat is None:
            return self.tk.encode(obs, special=special), obs
        close, body = self.chat.wrap(segment_text, obs)
        pre, post = close + self.chat.pre, self.chat.post
        text = pre + body + post
        if special or not self._has_special(body):
            return self.tk.encode(text, special=True), text  # as tools/tokenizer.py encodes a rendered conversation
        return self.tk.encode(pre, special=True) + self.tk.encode(body, special=False) + self.tk.encode(post, special=True), text

    def handle(self, req):
        if not isinstance(req, dict):
            raise EnvError("a request must be a JSON object")
        op = req.get("op")
        if op == "reset":
            ids = self._ids(req)
            key = req.get("key")
            state = self.env.reset(self._text(req, ids, "prompt"), req.get("answer"), req.get("meta"),
                                   tuple(key) if isinstance(key, list) else key)
            return {"state": self._state_out("" if state is None and not self.env.json_state else state)}
        if op == "step":
            ids = self._ids(req)
            text = self._text(req, ids, "text")
            turn = req.get("turn")
            if not isinstance(turn, int) or isinstance(turn, bool) or turn < 1:
                raise EnvError(f'a step\'s "turn" must be an integer >= 1, got {json.dumps(turn)}')
            got = self.env.step(self._state_in(req.get("state")), text, ids, turn)
            if not isinstance(got, tuple) or len(got) != 4:
                raise EnvError("step must return (observation, reward, done, state)")
            obs, reward, done, state = got
            if obs is not None and not isinstance(obs, str):
                raise EnvError(f"step's observation must be text or None, got {type(obs).__name__}")
            if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
                raise EnvError(f"step's reward must be a finite number, got {reward!r}")
            if not isinstance(done, bool):
                raise EnvError(f"step's done must be True or False, got {done!r}")
            ans_ids, ans_text = ([], "") if obs is None else self.encode_observation(text, obs)
            ans = {"ids": ans_ids, "text": ans_text, "reward": float(reward), "done": done}
            if state is not None:
                ans["state"] = self._state_out(state)
            return ans
        raise EnvError(f'unknown op {json.dumps(op)} (expected "reset" or "step")')

    def answer_line(self, line):
        """The answer to one request line (bytes), as one line of JSON text."""
        try:
            try:
                req = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise EnvError(f"the request is not JSON ({e})")
            ans = self.handle(req)
        except Exception as e:  # noqa: BLE001 (any failure of the class is the request's answer)
            if not isinstance(e, (EnvError, TokenizerError)):
                traceback.print_exc(file=sys.stderr)  # the whole story for its author; rlfuse shows the answer's line
            msg = str(e).strip().splitlines()
            ans = {"error": f"{type(e).__name__}: {msg[0] if msg else ''}" if not isinstance(e, (EnvError, TokenizerError))
                   else (msg[0] if msg else type(e).__name__)}
        return json.dumps(ans, ensure_ascii=True, allow_nan=False)


def serve(env, tokenizer, chat_role=None, stdin=None, stdout=None):
    """Serve requests until end of input. ENV: an Environment subclass (made with no arguments) or instance;
    TOKENIZER: a tools/tokenizer.py Tokenizer; CHAT_ROLE: wrap observations as that role's chat turn (None: plain).
    Standard output is moved aside for the protocol: whatever else writes to it goes to standard error."""
    if isinstance(env, type):
        env = env()
    _loop(Server(env, tokenizer, chat_role), stdin, stdout)


def _loop(server, stdin=None, stdout=None):
    if stdout is None:
        stdout = os.fdopen(os.dup(1), "w", encoding="ascii")
        os.dup2(2, 1)  # prints of the class and its child processes: standard error
        sys.stdout = sys.stderr
    stdin = stdin or sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return
        if not line.strip():
            continue
        stdout.write(server.answer_line(line) + "\n")
        stdout.flush()


def main(env_class, argv=None):
    """The command line of every environment program (module docstring), then serve."""
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0] or env_class.__name__
    p = argparse.ArgumentParser(prog=name, description=(env_class.__doc__ or "").strip().splitlines()[0] if env_class.__doc__ else None)
    p.add_argument("--checkpoint", required=True, help="an rlfuse checkpoint with a /tokenizer group")
    p.add_argument("--tokenizer-json", help="encode with this tokenizer.json (the checkpoint still decodes)")
    p.add_argument("--chat", action="store_true", help="wrap each observation as the chat template's turn and the generation prompt")
    p.add_argument("--chat-role", default="tool", help="the role of the observation's turn with --chat (default tool)")
    env_class.add_arguments(p)
    p.error = lambda msg: fail(name, msg, 2)  # one line, as every rlfuse tool
    args = p.parse_args(argv)
    try:
        env = env_class(args)
        tk = load_tokenizer(args.checkpoint, args.tokenizer_json)
        server = Server(env, tk, args.chat_role if args.chat else None)  # start-up errors before any request
    except (EnvError, TokenizerError) as e:
        fail(name, str(e))
    try:
        _loop(server)
    except KeyboardInterrupt:
        pass


def fail(name, msg, status=1):
    print(f"{name}: error: {msg}", file=sys.stderr)
    sys.exit(status)

