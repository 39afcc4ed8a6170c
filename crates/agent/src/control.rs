//! The loop: assemble the context, call the model, run the tool calls it
//! asks for, feed the results back, stop on an answer or a limit.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::conversation::{Message, ToolCall, ToolDef, trim};
use super::idempotency::idempotency_key;
use super::memory::MemoryTools;
use super::prompt::system_prompt;
use super::provider::{Model, ModelRequest, ModelResponse, ProviderError, Purpose, TokenUsage};
use super::stop::{Outcome, Stop, StuckDetector, intermediate_conclusion};
use super::summary::{self, CarriedSkill};
use super::tools::{CallResult, HubTool, ToolHub, check_arguments};
use super::trace::{StepRow, ToolRecord, Trace, clip, reply_record};
use crate::sandbox::SideEffect;
use crate::skill::tokens;
use skillbox_mcp::results::cut_head_tail;

/// Largest tool result fed back to the model, cut head and tail.
const MAX_TOOL_RESULT: usize = 32 * 1024;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub read: Duration,
    pub write: Duration,
    pub script: Duration,
}

impl Timeouts {
    /// How long the agent waits for a tool of each class: the sandbox's
    /// own limit for the class, plus a margin for the reply to come back,
    /// so the sandbox's precise error (not the agent's timeout) reaches
    /// the model.
    pub(crate) fn around_sandbox_defaults() -> Self {
        const MARGIN: Duration = Duration::from_secs(2);
        Timeouts {
            read: SideEffect::Read.default_timeout() + MARGIN,
            write: SideEffect::Write.default_timeout() + MARGIN,
            script: SideEffect::Script.default_timeout() + MARGIN,
        }
    }

    fn of(&self, class: SideEffect) -> Duration {
        match class {
            SideEffect::Read => self.read,
            SideEffect::Write | SideEffect::Destructive => self.write,
            SideEffect::Script => self.script,
        }
    }
}

pub(crate) struct LoopOptions {
    pub max_steps: usize,
    pub budget_tokens: Option<u64>,
    pub context_tokens: usize,
    /// The session summary's size in tokens; 0 trims instead.
    pub summary_tokens: u32,
    pub timeouts: Timeouts,
}

pub(crate) struct AgentLoop<'a, M: Model> {
    provider: &'a M,
    hub: &'a ToolHub,
    options: LoopOptions,
    pub trace: Trace,
    system: String,
    messages: Vec<Message>,
    usage: TokenUsage,
    budget_warned: bool,
    stuck: StuckDetector,
    /// The last side-effecting call that ran, by idempotency key, with its
    /// result. A repeat is answered from it only while no other
    /// side-effecting call has run since: write A, write B, write A must
    /// leave A, so the third call runs.
    last_write: Option<(String, CallResult)>,
    done: Vec<String>,
    tool_calls: usize,
    /// The order tools were first offered in. Tools a loaded skill adds
    /// go at the end, so the definitions sent before stay a byte-identical
    /// prefix the provider's prompt cache can reuse.
    tool_order: Vec<String>,
    /// Skill instructions whose turns a summary replaced, kept verbatim.
    carried: Vec<CarriedSkill>,
    /// The host's long-term memory tools, when a scope is named.
    memory: Option<MemoryTools>,
}

impl<'a, M: Model> AgentLoop<'a, M> {
    pub(crate) fn new(
        provider: &'a M,
        hub: &'a ToolHub,
        options: LoopOptions,
        trace: Trace,
        catalog: &str,
        task: String,
        memory: Option<MemoryTools>,
    ) -> Self {
        AgentLoop {
            provider,
            hub,
            options,
            trace,
            system: system_prompt(catalog),
            messages: vec![Message::User(task)],
            usage: TokenUsage::default(),
            budget_warned: false,
            stuck: StuckDetector::default(),
            last_write: None,
            done: Vec::new(),
            tool_calls: 0,
            tool_order: Vec::new(),
            carried: Vec::new(),
            memory,
        }
    }

    pub(crate) async fn run(mut self) -> (Outcome, Trace) {
        let mut last_text = None;
        let mut step = 0;
        let stop = loop {
            if step >= self.options.max_steps {
                break Stop::StepLimit(self.options.max_steps);
            }
            step += 1;
            if let Some(budget) = self.options.budget_tokens
                && self.usage.input + self.usage.output >= budget
            {
                break Stop::Budget(budget);
            }
            let tools = match self.hub.list().await {
                Ok(t) => t,
                Err(e) => break Stop::Stuck(e.to_string()),
            };
            let defs = self.in_stable_order(&tools);
            self.fit_context(step, &defs).await;

            let started = Instant::now();
            self.trace.event(
                "model_request",
                json!({"step": step, "messages": self.messages.len(), "tools": defs.len(), "provider": self.provider.describe()}),
            );
            let request = ModelRequest {
                system: &self.system,
                messages: &self.messages,
                tools: &defs,
                purpose: Purpose::Step,
                max_output_tokens: None,
            };
            let response = match self.provider.complete(&request).await {
                Ok(r) => r,
                Err(e) => {
                    self.trace
                        .event("model_error", json!({"step": step, "error": e.to_string()}));
                    break match e {
                        ProviderError::Replay(why) => Stop::Replay(why),
                        other => Stop::Provider(other.to_string()),
                    };
                }
            };
            self.usage.add(&response.usage);
            self.trace.event(
                "model_response",
                json!({
                    "step": step,
                    "usage": response.usage,
                    "stop_reason": response.stop_reason,
                    "reply": reply_record(&response),
                }),
            );
            self.trace.row(StepRow {
                step,
                action: "model".into(),
                input: format!("{} messages, {} tools", self.messages.len(), defs.len()),
                result: if response.tool_calls.is_empty() {
                    format!("answer: {}", response.text.as_deref().unwrap_or(""))
                } else {
                    format!("{} tool call(s)", response.tool_calls.len())
                },
                ms: started.elapsed().as_secs_f64() * 1000.0,
                tokens_in: response.usage.input,
                tokens_out: response.usage.output,
                tokens_cached: response.usage.cache_read,
            });
            self.check_budget_warning();
            last_text = response.text.clone();
            self.messages.push(Message::Assistant {
                text: response.text.clone(),
                tool_calls: response.tool_calls.clone(),
            });
            if response.tool_calls.is_empty() {
                break Stop::Done;
            }
            if let Some(stop) = self
                .run_tool_calls(step, &response.tool_calls, &tools)
                .await
            {
                break stop;
            }
        };
        self.trace.event(
            "stop",
            json!({"stop": stop, "steps": step, "usage": self.usage}),
        );
        let answer = match (&stop, last_text) {
            (Stop::Done, Some(text)) => text,
            (Stop::Done, None) => "(the model finished without an answer)".to_string(),
            (other, last) => intermediate_conclusion(other, &self.done, last.as_deref()),
        };
        let outcome = Outcome {
            stop,
            answer,
            steps: step,
            usage: self.usage,
            tool_calls: self.tool_calls,
        };
        (outcome, self.trace)
    }

    /// The tools' definitions: those offered before in the same order,
    /// then new ones by name. The host's memory tools come with the rest
    /// and take precedence over a served tool of the same name.
    fn in_stable_order(&mut self, tools: &BTreeMap<String, HubTool>) -> Vec<ToolDef> {
        let mut all: BTreeMap<&str, &ToolDef> = tools
            .iter()
            .map(|(name, t)| (name.as_str(), &t.def))
            .collect();
        for def in self.memory.iter().flat_map(MemoryTools::defs) {
            all.insert(&def.name, def);
        }
        self.tool_order
            .retain(|name| all.contains_key(name.as_str()));
        for name in all.keys() {
            if !self.tool_order.iter().any(|n| n == name) {
                self.tool_order.push(name.to_string());
            }
        }
        self.tool_order
            .iter()
            .map(|name| all[name.as_str()].clone())
            .collect()
    }

    fn check_budget_warning(&mut self) {
        if let Some(budget) = self.options.budget_tokens {
            let used = self.usage.input + self.usage.output;
            if !self.budget_warned && used * 10 >= budget * 8 {
                self.budget_warned = true;
                self.trace.warn(&format!(
                    "{used} of {budget} budget tokens used (80%), {} of them read from the provider's prompt cache; the loop stops at 100%",
                    self.usage.cache_read
                ));
            }
        }
    }

    /// Keeps the context within its budget: older turns are replaced by
    /// a summary when one is configured, and old tool results are trimmed
    /// when that is not enough or the summary call fails.
    async fn fit_context(&mut self, step: usize, tools: &[ToolDef]) {
        let fixed = tokens::count(&self.system)
            + tools
                .iter()
                .map(|t| tokens::count(&t.input_schema.to_string()) + tokens::count(&t.description))
                .sum::<usize>();
        let budget = self.options.context_tokens;
        let fits = |messages: &[Message]| fixed + estimate(messages) <= budget;
        if fits(&self.messages) {
            return;
        }
        if self.options.summary_tokens > 0 {
            if let Err(SummaryFailed(why)) = self.summarize(step).await {
                self.trace.warn(&format!(
                    "context over {budget} tokens and the summary failed ({why}): trimming old tool results instead"
                ));
            }
            if fits(&self.messages) {
                return;
            }
        }
        let before = estimate(&self.messages);
        let trimmed = trim(&mut self.messages, fits);
        if trimmed > 0 {
            let after = estimate(&self.messages);
            self.trace.event(
                "trim",
                json!({"results_trimmed": trimmed, "tokens_before": before, "tokens_after": after}),
            );
            self.trace.warn(&format!(
                "context over {budget} tokens: trimmed {trimmed} old tool result(s)"
            ));
        }
    }

    /// Replaces the turns between the task and the recent ones with a
    /// summary the model writes in a separate call with the host's own
    /// instruction and no tools. Makes no call when the turns it would
    /// replace (skill instructions aside, which stay) are no larger than
    /// the summary could be.
    async fn summarize(&mut self, step: usize) -> Result<(), SummaryFailed> {
        let limit = self.options.summary_tokens;
        let Some(cut) = summary::cut_point(&self.messages) else {
            return Ok(());
        };
        let replaced = &self.messages[1..cut];
        let skills = summary::skills_in(replaced);
        let carried: usize = skills.iter().map(|s| tokens::count(&s.text)).sum();
        if estimate(replaced).saturating_sub(carried) <= limit as usize {
            return Ok(());
        }
        let instruction = summary::instruction(limit);
        let request_messages = [Message::User(summary::transcript(replaced))];
        let request = ModelRequest {
            system: &instruction,
            messages: &request_messages,
            tools: &[],
            purpose: Purpose::Summary,
            max_output_tokens: Some(limit),
        };
        let started = Instant::now();
        let response = self.provider.complete(&request).await;
        let response: ModelResponse = match response {
            Ok(r) => r,
            Err(e) => {
                self.trace.event(
                    "summary_error",
                    json!({"step": step, "error": e.to_string()}),
                );
                return Err(SummaryFailed(e.to_string()));
            }
        };
        self.usage.add(&response.usage);
        let text = response
            .text
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| summary::bounded(t, limit))
            .ok_or_else(|| SummaryFailed("the model wrote no summary".into()))?;
        for skill in skills {
            if !self.carried.iter().any(|c| c.text == skill.text) {
                self.carried.push(skill);
            }
        }
        let replacement = Message::User(summary::message(&text, &self.carried));
        let before = estimate(&self.messages);
        let removed: Vec<Message> = self
            .messages
            .splice(1..cut, std::iter::once(replacement))
            .collect();
        let tool_results = removed
            .iter()
            .filter(|m| matches!(m, Message::Tool { .. }))
            .count();
        let after = estimate(&self.messages);
        self.trace.event(
            "summary",
            json!({
                "step": step,
                "replaced": {"first": 1, "last": cut - 1, "messages": removed.len(), "tool_results": tool_results},
                "summary": text,
                "summary_tokens": tokens::count(&text),
                "skills_carried": self.carried.len(),
                "tokens_before": before,
                "tokens_after": after,
                "usage": response.usage,
                "reply": reply_record(&response),
            }),
        );
        self.trace.row(StepRow {
            step,
            action: "summary".into(),
            input: format!("{} messages ({} tool results)", removed.len(), tool_results),
            result: format!("{} → {} context tokens: {text}", before, after),
            ms: started.elapsed().as_secs_f64() * 1000.0,
            tokens_in: response.usage.input,
            tokens_out: response.usage.output,
            tokens_cached: response.usage.cache_read,
        });
        Ok(())
    }

    async fn run_tool_calls(
        &mut self,
        step: usize,
        calls: &[ToolCall],
        tools: &BTreeMap<String, HubTool>,
    ) -> Option<Stop> {
        for call in calls {
            self.tool_calls += 1;
            if let Some(stop) = self.stuck.before(&call.name, &call.arguments) {
                return Some(stop);
            }
            let started = Instant::now();
            let (result, outcome) = self.execute(step, call, tools).await;
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            if !result.is_error {
                self.done
                    .push(format!("{} {}", call.name, clip(&call.arguments, 80)));
            }
            let (content, _) = cut_head_tail(&result.text, MAX_TOOL_RESULT, None);
            self.trace.event(
                "tool_call",
                json!({
                    "step": step, "id": call.id, "name": call.name, "arguments": call.arguments,
                    "result_bytes": result.text.len(), "outcome": outcome, "duration_ms": ms,
                    "result": content, "is_error": result.is_error,
                }),
            );
            self.trace.tool_results.push(ToolRecord {
                step,
                name: call.name.clone(),
                arguments: call.arguments.clone(),
                result: content.clone(),
                is_error: result.is_error,
            });
            self.trace.row(StepRow {
                step,
                action: call.name.clone(),
                input: call.arguments.clone(),
                result: format!("{outcome}: {}", result.text),
                ms,
                tokens_in: 0,
                tokens_out: 0,
                tokens_cached: 0,
            });
            self.messages.push(Message::Tool {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content,
                is_error: result.is_error,
            });
            if let Some(question) = self.hub.take_refusal() {
                return Some(Stop::Unconfirmed(question));
            }
            if let Some(stop) = self.stuck.after(result.is_error, &result.text) {
                return Some(stop);
            }
        }
        None
    }

    /// Runs one call, or explains to the model what was wrong with it.
    async fn execute(
        &mut self,
        step: usize,
        call: &ToolCall,
        tools: &BTreeMap<String, HubTool>,
    ) -> (CallResult, &'static str) {
        let correct = |text: String| {
            (
                CallResult {
                    text,
                    is_error: true,
                },
                "corrected",
            )
        };
        let memory_def = self.memory.as_ref().and_then(|m| m.def(&call.name));
        let hub_tool = tools.get(&call.name);
        let Some(schema) = memory_def
            .map(|d| &d.input_schema)
            .or(hub_tool.map(|t| &t.def.input_schema))
        else {
            let names: Vec<&str> = tools
                .keys()
                .map(String::as_str)
                .chain(
                    self.memory
                        .iter()
                        .flat_map(|m| m.defs().iter().map(|d| d.name.as_str())),
                )
                .collect();
            return correct(format!(
                "unknown tool `{}`. Tools available now: {}. Skill tools appear after load_skill.",
                call.name,
                names.join(", ")
            ));
        };
        let arguments: Map<String, Value> = match serde_json::from_str::<Value>(
            if call.arguments.trim().is_empty() {
                "{}"
            } else {
                &call.arguments
            },
        ) {
            Ok(Value::Object(map)) => map,
            Ok(other) => {
                return correct(format!(
                    "the arguments of `{}` must be a JSON object; got {other}",
                    call.name
                ));
            }
            Err(e) => {
                return correct(format!(
                    "the arguments of `{}` are not valid JSON ({e}); send one JSON object matching the tool's inputSchema",
                    call.name
                ));
            }
        };
        if let Err(problem) = check_arguments(schema, &arguments) {
            return correct(format!(
                "invalid arguments for `{}`: {problem}. Nothing was run; fix it and call again.",
                call.name
            ));
        }
        let (Some(tool), None) = (hub_tool, memory_def) else {
            let memory = self.memory.as_ref().expect("a memory tool has its store");
            let result = memory.call(&call.name, &arguments, step).await;
            let outcome = if result.is_error { "error" } else { "ok" };
            return (result, outcome);
        };
        let key = tool
            .has_side_effects()
            .then(|| idempotency_key(&call.name, &arguments));
        if let Some(key) = &key
            && let Some((last_key, previous)) = &self.last_write
            && last_key == key
        {
            let text = format!(
                "not executed again: this exact call already ran (idempotency key {}). Its result was:\n{}",
                &key[..16],
                previous.text
            );
            return (
                CallResult {
                    text,
                    is_error: previous.is_error,
                },
                "deduplicated",
            );
        }
        let result = self
            .hub
            .call(
                tool,
                arguments,
                self.options.timeouts.of(tool.class),
                key.as_deref(),
            )
            .await;
        if let Some(key) = key {
            self.last_write = (!result.is_error).then(|| (key, result.clone()));
        }
        let outcome = if result.is_error { "error" } else { "ok" };
        (result, outcome)
    }
}

/// Why a summary call gave nothing to use; the loop trims instead.
struct SummaryFailed(String);

/// Tokens of a conversation, as o200k_base counts them.
fn estimate(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| match m {
            Message::User(t) => tokens::count(t) + 4,
            Message::Assistant { text, tool_calls } => {
                text.as_deref().map_or(0, tokens::count)
                    + tool_calls
                        .iter()
                        .map(|c| tokens::count(&c.name) + tokens::count(&c.arguments))
                        .sum::<usize>()
                    + 4
            }
            Message::Tool { content, .. } => tokens::count(content) + 4,
        })
        .sum()
}
