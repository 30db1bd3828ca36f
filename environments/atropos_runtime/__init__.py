"""The Atropos runtime: what turns a `Task` (environments/task.py) into training groups.

An environment subclasses `base.RubricEnv` and runs as `python <env>.py serve|process|evaluate`.
Where each concept lives (a sample flows top to bottom):

  base.py               RubricEnv / RubricEnvConfig: the BaseEnv every environment subclasses;
                        options_given.py which --env.* options the user set (command line, --config);
                        config_types.py list/dict config fields the command line gives as text
  serve_loop.py         serve: keep groups in flight, hand them to run-api; serve_api.py talks to run-api
  modes.py              process and evaluate; sampling_slots.py bounds groups in flight
  rollouts.py           a sample with its exact tokens -> an Atropos group; checks.py its invariants
  episodes.py           multi-turn episodes (a Task that answers each turn); episode_runtime.py hooks
                        them into the modes; turn_tokens.py the exact multi-turn token accounting
  servers.py            inference clients (stock vLLM, /generate, SGLang); token_completions.py the
                        token-id wire format; completion_batcher.py coalesces requests
  server_health.py      outages of inference / run-api reported in seconds; tls.py httpx verify
  output.py             process output: resumable JSONL (+ dropped groups); run_identity.py what
                        defines a run, so a re-run resumes only the same one; fast_json.py the JSON
                        of the hot paths (orjson, json's meaning kept)
  viewer.py             the rollout viewer (`rlvr view`); viewer_data.py what it reads from the
                        output files, viewer_vocab.py token texts, viewer_page.py its static page
  env_protocol.py       what the modes need of an env (RubricEnv provides it)
  lazy_imports.py       start-up: import only what the mode needs; tokenizer_snapshot.py torch-free
                        tokenizer stand-in
  cli.py, demo.py       the `rlvr` command and `rlvr demo`; cli_help.py the scripts' --help with the
                        defaults a run uses; local_model.py a tiny offline model +
                        local vLLM; real_model.py the real offline model (SmolLM2, `rlvr model`);
                        atropos_generate_server.py atroposlib's /generate server on vLLM

Nothing here imports the Verifiers bridge (`environments/vf_bridge/`) or an environment module.
"""
