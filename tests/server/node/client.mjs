// The openai npm package against `loomctx serve`: a non-Python agent through Loom.
// Run by tests/server/test_node.py with LOOM_URL and LOOM_KEY set; prints one JSON line.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.LOOM_URL, apiKey: process.env.LOOM_KEY, maxRetries: 0 });
const session = { headers: { "X-Loom-Session": "node-agent" } };
const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city now.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];

const messages = [{ role: "user", content: "Weather in Oslo?" }];
const { data: first, response } = await client.chat.completions
  .create({ model: "gpt-test", messages, tools }, session)
  .withResponse();
const call = first.choices[0].message.tool_calls[0];
messages.push(first.choices[0].message);
messages.push({ role: "tool", tool_call_id: call.id, content: "snow, -3C" });

let streamed = "";
const stream = await client.chat.completions.create({ model: "gpt-test", messages, tools, stream: true }, session);
for await (const chunk of stream) {
  streamed += chunk.choices[0]?.delta?.content ?? "";
}

let error = null;
try {
  await client.chat.completions.create({ model: "no-such-model", messages });
} catch (e) {
  error = { status: e.status, message: e.message };
}

console.log(JSON.stringify({
  report: response.headers.get("x-loom-report"),
  call: { id: call.id, name: call.function.name, arguments: call.function.arguments },
  streamed,
  error,
}));
