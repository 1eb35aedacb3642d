// A small component with state and an effect: the page is only marked ready
// once React has rendered and run effects, so the screenshot shows its work.
import { useEffect, useState } from 'react';

const swatches = ['#e63946', '#2a9d8f', '#264653', '#e9c46a'];

export default function App() {
  const [count, setCount] = useState(0);
  useEffect(() => setCount(swatches.length), []);
  return (
    <main id={count ? 'ready' : undefined} style={{ padding: 24 }}>
      <h1 style={{ color: '#1d3557', margin: '0 0 16px' }}>Hello from React</h1>
      <div style={{ display: 'flex', gap: 12 }}>
        {swatches.slice(0, count).map((c) => (
          <div key={c} style={{ width: 120, height: 120, background: c, borderRadius: 8 }} />
        ))}
      </div>
      <p style={{ fontSize: 20 }}>{count} boxes rendered by a component</p>
    </main>
  );
}
